//! `ruled ctl` (docs/operating.md#ruled-ctl): the control protocol's
//! client on the vehicle. It subscribes to its reply channel, queues one
//! request with the push script, and waits for the reply until the
//! request's deadline. No reply by then means no `ruled` serves the
//! namespace: that is how an operator tells a dead `ruled` from an idle one.

use super::protocol::{
    AddRequest, EmitRequest, Empty, Named, Page, SetEnabledRequest, TestRequest, TraceRequest,
};
use super::signing::{self, ControlKey};
use super::wire::{self, ControlKeys, Reply, Request};
use super::{escape, render};
use crate::connection::{describe, CONNECT_TIMEOUT};
use crate::pubsub::{Delivery, Name, PubSub};
use crate::tls::Tls;
use serde_json::Value;
use std::io::Read;
use std::time::Duration;

/// How a `ruled ctl` call ended, and its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// `ruled` answered with an error (exit 1).
    #[error("{0}")]
    Refused(String),
    /// Nothing answered in time, or the queue is full (exit 3).
    #[error("{0}")]
    NoAnswer(String),
    /// Redis could not be reached or misbehaved (exit 4).
    #[error("{0}")]
    Redis(String),
    /// The request could not be made (exit 2).
    #[error("{0}")]
    Usage(String),
    /// An answer came, but not signed with the control key: something
    /// other than `ruled` may have answered (exit 5).
    #[error("{0}")]
    Untrusted(String),
}

impl CallError {
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Refused(_) => 1,
            Self::Usage(_) => 2,
            Self::NoAnswer(_) => 3,
            Self::Redis(_) => 4,
            Self::Untrusted(_) => 5,
        }
    }
}

/// Where and how long to ask.
#[derive(Debug)]
pub struct Target {
    pub client: redis::Client,
    pub tls: Tls,
    /// The URL as logs may show it (password redacted).
    pub url: String,
    pub keys: ControlKeys,
    /// How far ahead the request's deadline is (at most
    /// [`wire::MAX_AHEAD_MS`]).
    pub timeout: Duration,
    /// `--control-key`: requests are signed, and only a reply signed with
    /// it is believed (docs/operating.md#trust).
    pub key: Option<ControlKey>,
}

/// How much longer than the deadline the client waits, for a reply sent
/// just before it to arrive.
const ARRIVAL_GRACE: Duration = Duration::from_millis(500);

/// Sends `method` with `payload` and waits for the one reply.
pub async fn call(target: &Target, method: &str, payload: Value) -> Result<Value, CallError> {
    let id = request_id().map_err(|e| CallError::Usage(format!("no random request id: {e}")))?;
    let reply_channel = target.keys.reply_channel(&id);
    let unreachable =
        |e: String| CallError::Redis(format!("cannot reach redis at {}: {e}", target.url));
    let info = target.client.get_connection_info();
    let mut replies = PubSub::open(
        info,
        &target.tls,
        std::iter::once(Name::plain(&reply_channel)),
        std::iter::empty(),
    )
    .await
    .map_err(|e| unreachable(e.to_string()))?;
    replies.set_limit(wire::MAX_REPLY_BYTES);
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(target.timeout + CONNECT_TIMEOUT));
    let mut con = target
        .client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| unreachable(describe(&e)))?;
    let now = super::server_time_ms(&mut con).await.map_err(unreachable)?;
    let timeout_ms = i64::try_from(target.timeout.as_millis()).unwrap_or(wire::MAX_AHEAD_MS);
    let request = Request {
        id,
        method: method.to_string(),
        reply_channel,
        deadline: now.saturating_add(timeout_ms),
        payload,
        signature: None,
    };
    let mut text = serde_json::to_string(&request).map_err(|e| CallError::Usage(e.to_string()))?;
    if let Some(key) = &target.key {
        text = signing::attach(&text, &key.sign_request(text.as_bytes()));
    }
    if text.len() > wire::MAX_REQUEST_BYTES {
        return Err(CallError::Usage(format!(
            "the request is {} bytes; ruled reads at most {} KiB",
            text.len(),
            wire::MAX_REQUEST_BYTES / 1024
        )));
    }
    push(&mut con, &target.keys, &text, target.timeout).await?;
    match tokio::time::timeout(target.timeout + ARRIVAL_GRACE, replies.next()).await {
        Ok(Ok(Delivery::Message(message))) => {
            read_reply(message.get_payload_bytes(), &text, target)
        }
        Ok(Ok(Delivery::Oversized { bytes, .. })) => Err(CallError::Redis(format!(
            "the reply was {bytes} bytes, over the {} KiB a reply may be",
            wire::MAX_REPLY_BYTES / 1024
        ))),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => {
            // Taken back, so requests nobody serves do not fill the queue.
            let _: redis::RedisResult<i64> = redis::cmd("LREM")
                .arg(&target.keys.rpc)
                .arg(1)
                .arg(&text)
                .query_async(&mut con)
                .await;
            Err(CallError::NoAnswer(format!(
                "no answer from ruled within {}ms (namespace `{}`, redis {}): ruled is not \
                 running, not connected to this redis, or serves another namespace",
                target.timeout.as_millis(),
                target.keys.namespace,
                target.url
            )))
        }
    }
}

/// Queues the request with the push script. A full queue is tried again
/// until `timeout` is over (ruled empties a list of junk at once,
/// docs/service.md#what-ruled-reads-and-its-bounds); then refused, saying
/// how many of the waiting items are not requests.
async fn push(
    con: &mut redis::aio::MultiplexedConnection,
    keys: &ControlKeys,
    text: &str,
    timeout: Duration,
) -> Result<(), CallError> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let pushed: i64 = redis::cmd("EVAL")
            .arg(wire::PUSH_SCRIPT)
            .arg(1)
            .arg(&keys.rpc)
            .arg(text)
            .arg(wire::MAX_WAITING)
            .arg(wire::LIST_EXPIRY_SECS)
            .query_async(con)
            .await
            .map_err(|e| CallError::Redis(format!("cannot queue the request: {}", describe(&e))))?;
        if pushed != 0 {
            return Ok(());
        }
        if started.elapsed() + pause >= timeout {
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    let seen = match super::list::survey(con, &keys.rpc).await {
        Some((_, 0)) | None => String::new(),
        Some((_, junk)) => format!(
            "; {junk} of them are not requests (over {} KiB, not JSON, or without `id` and \
             `method`): something other than a control client is pushing onto `{}`",
            wire::MAX_REQUEST_BYTES / 1024,
            keys.rpc
        ),
    };
    Err(CallError::NoAnswer(format!(
        "the control queue `{}` is full ({} requests waiting){seen}: ruled is not taking \
         requests (stopped, or stuck); nothing was sent",
        keys.rpc,
        wire::MAX_WAITING
    )))
}

fn read_reply(bytes: &[u8], request: &str, target: &Target) -> Result<Value, CallError> {
    if let Some(key) = &target.key {
        check_signature(bytes, request, key, &target.keys)?;
    }
    let reply: Reply = serde_json::from_slice(bytes)
        .map_err(|e| CallError::Redis(format!("the reply is not a control reply: {e}")))?;
    if reply.ok {
        Ok(reply.payload)
    } else {
        Err(CallError::Refused(reply.error))
    }
}

/// A reply is believed only when signed with `key` over the request that
/// was sent: an unsigned or wrongly signed one may come from a competing
/// consumer of `NS:rpc`, which took the request, so `ruled` never saw it.
fn check_signature(
    bytes: &[u8],
    request: &str,
    key: &ControlKey,
    keys: &ControlKeys,
) -> Result<(), CallError> {
    let danger = format!(
        "another client popping `{}` (a competing consumer) may have taken the request and          answered for ruled, so ruled may never have seen it; do not trust this answer, the          request may not have been carried out",
        keys.rpc
    );
    match signing::detach(bytes) {
        None => Err(CallError::Untrusted(format!(
            "the answer is not signed with the control key {}: {danger} (or this ruled runs without --control-key)",
            key.path().display()
        ))),
        Some((body, signature)) if !key.verifies_reply(request.as_bytes(), &body, &signature) => {
            Err(CallError::Untrusted(format!(
                "the answer's signature does not verify with the control key {}: {danger} (or                  it altered the request on the way, or ruled has another key)",
                key.path().display()
            )))
        }
        Some(_) => Ok(()),
    }
}

/// 32 lowercase hex characters from the system's random source.
fn request_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How `ruled ctl` prints a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people.
    Text,
    /// The reply's payload, as JSON on one line.
    Json,
}

/// The method and payload of a `ruled ctl` command line.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlMethod {
    /// v1.status: version, bundle, uptime, workers, queue, counters.
    Status,
    /// v1.list: every rule, whether it is on, its runs, last fire, errors.
    List {
        /// The first rule shown (0-based, bundle order).
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// How many rules (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// v1.show: one rule's definition and its live run.
    Show {
        /// The rule's name.
        rule: String,
    },
    /// v1.test: what RULE would do with an event now; nothing runs.
    Test {
        /// The rule's name.
        rule: String,
        /// The event as JSON, e.g. '{"topic":"alarm.triggered","data":{"level":2}}'.
        event: String,
    },
    /// v1.guards: the safety envelope: every guard (what it covers, when
    /// it allows the action, what it reads, its toast) and every limit.
    Guards,
    /// v1.pending: every step waiting for its `after`, earliest first.
    Pending {
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// v1.set-enabled: turn a rule on or off (kept across restarts), or
    /// `default`: remove its override, back to what the bundle says.
    SetEnabled {
        /// The rule's name.
        rule: String,
        /// `on`, `off`, or `default` (remove the override).
        #[arg(value_parser = ["on", "off", "default"])]
        state: String,
    },
    /// v1.trace: RULE's last runs, step by step, and its last non-fire
    /// (every traced rule's without RULE).
    Trace {
        /// The rule's name.
        rule: Option<String>,
        /// The first run shown (the rule's, oldest first), or with no RULE
        /// the first traced rule.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Runs (or with no RULE, rules) shown, 1 to 1000.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// v1.reload: read the bundle file again and take its rules over
    /// without a restart; a bad bundle is refused and the loaded one keeps
    /// running.
    Reload,
    /// v1.add: check FILE (one rule) with rulec and write it into ruled's
    /// rules directory (`--rules-dir`), where the rebuild makes it live.
    /// A rule with an `exec` or `can` step needs `--control-key` (a signed
    /// request); at most 64 added files, 1 MiB in all.
    Add {
        /// A rule file holding one rule.
        file: std::path::PathBuf,
    },
    /// v1.emit: hand TOPIC's event to the running rules, as if it came from
    /// the bus (it is not published). Unsigned only on a topic any Redis
    /// client could publish: an owned topic or `input.*` needs
    /// `--control-key` (a signed request).
    Emit {
        /// The event's topic, e.g. alarm.triggered.
        topic: String,
        /// The event's `from`.
        #[arg(long)]
        from: Option<String>,
        /// The event's `to`, e.g. level-2-triggered.
        #[arg(long)]
        to: Option<String>,
        /// One `data` entry, KEY=VALUE; VALUE is read as JSON when it is
        /// JSON (`level=2` a number, `ok=true` a bool), else as a string
        /// (`name="2"` for the string "2"). Repeatable.
        #[arg(long = "data", value_name = "KEY=VALUE", value_parser = data_entry)]
        data: Vec<(String, Value)>,
    },
    /// Any method with a JSON payload, e.g. `call v1.list '{"limit":5}'`.
    Call {
        /// The method, e.g. v1.status.
        method: String,
        /// The payload as JSON.
        #[arg(default_value = "{}")]
        payload: String,
    },
}

impl CtlMethod {
    /// The wire method and payload.
    pub fn request(&self) -> Result<(String, Value), CallError> {
        let parse = |what: &str, text: &str| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| CallError::Usage(format!("{what} is not JSON: {e}")))
        };
        Ok(match self {
            Self::Status => ("v1.status".into(), payload(&Empty {})?),
            Self::List { offset, limit } => (
                "v1.list".into(),
                payload(&Page {
                    offset: *offset,
                    limit: *limit,
                })?,
            ),
            Self::Show { rule } => ("v1.show".into(), payload(&Named { name: rule.clone() })?),
            Self::Test { rule, event } => (
                "v1.test".into(),
                payload(&TestRequest {
                    name: rule.clone(),
                    event: parse("the event", event)?,
                })?,
            ),
            Self::Guards => ("v1.guards".into(), payload(&Empty {})?),
            Self::Pending { offset, limit } => (
                "v1.pending".into(),
                payload(&Page {
                    offset: *offset,
                    limit: *limit,
                })?,
            ),
            Self::SetEnabled { rule, state } => (
                "v1.set-enabled".into(),
                payload(&SetEnabledRequest {
                    name: rule.clone(),
                    enabled: match state.as_str() {
                        "on" => Value::Bool(true),
                        "off" => Value::Bool(false),
                        _ => Value::Null,
                    },
                    expected_revision: String::new(),
                })?,
            ),
            Self::Trace {
                rule,
                offset,
                limit,
            } => (
                "v1.trace".into(),
                payload(&TraceRequest {
                    name: rule.clone(),
                    offset: *offset,
                    limit: *limit,
                })?,
            ),
            Self::Reload => ("v1.reload".into(), payload(&Empty {})?),
            Self::Add { file } => {
                let max = super::add::MAX_DEFINITION_BYTES as u64;
                let bytes = rulecore_io::input_file::read_bounded(file, max)
                    .map_err(|e| CallError::Usage(e.to_string()))?;
                let definition = String::from_utf8(bytes)
                    .map_err(|_| CallError::Usage(format!("{} is not UTF-8", file.display())))?;
                (
                    "v1.add".into(),
                    payload(&AddRequest {
                        definition,
                        expected_revision: String::new(),
                    })?,
                )
            }
            Self::Emit {
                topic,
                from,
                to,
                data,
            } => (
                "v1.emit".into(),
                payload(&emit_request(topic, from, to, data)?)?,
            ),
            Self::Call { method, payload } => (method.clone(), parse("the payload", payload)?),
        })
    }
}

/// `--data KEY=VALUE`: VALUE as JSON when it reads as JSON, else the
/// string itself.
fn data_entry(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))?;
    if key.is_empty() {
        return Err(format!("`{text}` has no KEY before `=`"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

/// `v1.emit`'s request from `ruled ctl emit`'s arguments; a key given
/// twice is refused (the bus's decoder refuses a repeated field too).
fn emit_request(
    topic: &str,
    from: &Option<String>,
    to: &Option<String>,
    entries: &[(String, Value)],
) -> Result<EmitRequest, CallError> {
    let mut data = serde_json::Map::new();
    for (key, value) in entries {
        if data.insert(key.clone(), value.clone()).is_some() {
            return Err(CallError::Usage(format!("--data {key}=... given twice")));
        }
    }
    Ok(EmitRequest {
        topic: topic.to_string(),
        from: from.clone(),
        to: to.clone(),
        data: (!data.is_empty()).then_some(data),
    })
}

/// A typed request's payload as JSON.
fn payload(request: &impl serde::Serialize) -> Result<Value, CallError> {
    serde_json::to_value(request)
        .map_err(|e| CallError::Usage(format!("request not encodable: {e}")))
}

/// Runs one `ruled ctl` command; the text to print on success.
pub async fn run(target: &Target, method: &CtlMethod, format: Format) -> Result<String, CallError> {
    let (name, payload) = method.request()?;
    let reply = call(target, &name, payload).await?;
    let text = match format {
        Format::Json => reply.to_string(),
        Format::Text => render::text(&name, &reply),
    };
    // Whatever the reply holds, no control character reaches the terminal.
    Ok(escape::terminal(&text))
}
