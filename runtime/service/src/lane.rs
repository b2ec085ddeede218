//! The Redis lane (docs/service.md#durable-work-in-bulk): the actions that
//! are one Redis command each (`redis`: `LPUSH list push`; `publish` and
//! `notify`: `PUBLISH channel message`) are sent in
//! batches on the actions connection, so they take no worker and a burst
//! of them (10,000 overdue steps at start) runs at the network's pace.
//!
//! A batch is the actions the lane holds, in the order they were handed
//! over (`fire-at` order for due steps), as many as [`BATCH`] of one
//! `timeout`. Their pending records are removed in the same transaction
//! as their commands: `MULTI`, one `HDEL` of every record, the commands in
//! order, `EXEC`. Redis runs it whole or not at all, so each record is
//! removed before its action runs, and a crash of ruled can neither run
//! such a step twice nor lose it (docs/semantics.md#what-a-crash-or-a-power-loss-can-repeat).
//! The transaction waits for the records' own writes first (the store
//! writer's queue settled, [`StoreWriter::settle`]), so a removal never
//! overtakes its record. Each reply is read on its own, waited for at
//! most the timeout: the outcome rules of one action hold for each
//! (docs/semantics.md#worker-pool-and-actions).

use crate::bus::Publications;
use crate::connection::{describe, is_definite_failure};
use crate::direct::Direct;
use crate::pool::{Handed, Report};
use crate::record_store::StoreWriter;
use rulecore::bundle::Action;
use rulecore::event::Event;
use ruled_engine::Job;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long the derived events still queued at stop may take to go out.
const STOP_FLUSH: Duration = Duration::from_secs(3);

/// The most actions one batch sends: one transaction of their records'
/// removal and their commands.
pub use ruled_engine::pool::LANE_BATCH as BATCH;

/// The one Redis command an action sends, and how long its reply may take.
#[derive(Debug, Clone, Copy)]
pub struct LaneCommand<'a> {
    /// The command's name, as log lines and errors say it.
    pub name: &'static str,
    pub key: &'a str,
    pub value: &'a str,
    pub timeout: Duration,
}

impl<'a> LaneCommand<'a> {
    /// The command of an action the lane performs; `None` for the others
    /// (`exec`, `can`: the workers').
    pub fn of(action: &'a Action) -> Option<Self> {
        // The job's performed action: its values computed, a notify its
        // publish (docs/rules.md#computed-values).
        let (name, key, value, timeout_ns) = match action {
            Action::Redis {
                list,
                push,
                timeout_ns,
            } => ("LPUSH", list, push, timeout_ns),
            Action::Publish {
                channel,
                message,
                timeout_ns,
            } => ("PUBLISH", channel, message, timeout_ns),
            Action::Exec { .. } | Action::Can(_) | Action::Notify(_) => return None,
        };
        Some(Self {
            name,
            key,
            value: value.plain()?,
            timeout: Duration::from_nanos(*timeout_ns),
        })
    }

    /// Appends the command, in RESP, to `bytes`: its head written once
    /// (`*3`, the name), then the key and the value.
    fn push(&self, bytes: &mut Vec<u8>) {
        let head: &[u8] = match self.name {
            "LPUSH" => b"*3\r\n$5\r\nLPUSH\r\n",
            "PUBLISH" => b"*3\r\n$7\r\nPUBLISH\r\n",
            name => {
                crate::resp::push_command(bytes, 3);
                crate::resp::push_bulk(bytes, &[name.as_bytes()]);
                b""
            }
        };
        bytes.extend_from_slice(head);
        crate::resp::push_bulk(bytes, &[self.key.as_bytes()]);
        crate::resp::push_bulk(bytes, &[self.value.as_bytes()]);
    }
}

/// How long `job`'s command may wait for its reply (and its record's
/// removal for its confirmation).
fn timeout_of(job: &Job) -> Duration {
    LaneCommand::of(job.performed()).map_or(Duration::ZERO, |command| command.timeout)
}

/// Takes the next batch off `waiting`: the first action and those right
/// behind it with the same timeout, at most [`BATCH`].
pub(crate) fn take_batch(waiting: &mut VecDeque<Handed>) -> Vec<Handed> {
    let Some(first) = waiting.front() else {
        return Vec::new();
    };
    let timeout = timeout_of(&first.job);
    let mut batch = Vec::with_capacity(waiting.len().min(BATCH));
    while batch.len() < BATCH
        && waiting
            .front()
            .is_some_and(|handed| timeout_of(&handed.job) == timeout)
    {
        batch.extend(waiting.pop_front());
    }
    batch
}

/// Performs `batch` (`take_batch`): waits for its records' writes,
/// reports each action started (on `started`), sends the removal of the
/// records and the commands in one transaction, and reports each outcome
/// (on `reports`). Returns false when the driver is gone.
pub async fn perform(
    batch: &[Job],
    con: Option<&mut Direct>,
    store: Option<&StoreWriter>,
    reports: &mpsc::UnboundedSender<Report>,
    started: &mpsc::UnboundedSender<Report>,
    publications: Option<&mut Publications>,
) -> bool {
    let Some(first) = batch.first() else {
        return true;
    };
    let timeout = timeout_of(first);
    let records: Vec<&str> = batch
        .iter()
        .filter_map(|job| job.record_to_drop_at_start().map(|id| &**id))
        .collect();
    let removal = match store {
        Some(store) if !records.is_empty() => removal(store, &records, timeout).await,
        _ => None,
    };
    for job in batch {
        if started.send(Report::Started(job.id)).is_err() {
            return false;
        }
    }
    let outcomes = send(con, batch, timeout, removal.as_ref(), publications).await;
    for (job, outcome) in batch.iter().zip(outcomes) {
        let report = match outcome {
            Outcome::Finished(result) => Report::Finished(job.id, result),
            Outcome::NotPerformed(why) => Report::NotPerformed {
                job: job.id,
                record: job.record_to_drop_at_start().cloned(),
                why,
            },
        };
        if reports.send(report).is_err() {
            return false;
        }
    }
    true
}

/// What became of one action of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Performed, or failed on its own (`Err`: an error reply to its
    /// command), or of unknown outcome (`Ok`: the run goes on).
    Finished(Result<(), String>),
    /// Redis refused the batch's transaction whole (`EXECABORT`: out of
    /// memory, a transaction error), or it could not be sent: no command
    /// ran and no record was removed. The engine retries or ends the step
    /// (docs/semantics.md#an-action-redis-refused-whole).
    NotPerformed(String),
}

/// The `HDEL` of `records` that goes in the transaction with their
/// actions, once the store writer has written everything queued before
/// (their records among it). With the writer stuck past `wait` (Redis
/// stalled) the removal is queued behind the records' writes instead, as
/// an `exec` step's is, and the actions go without it: the outcome of the
/// removal is then unknown, and a crash before it lands runs the steps
/// again at the next start.
async fn removal(store: &StoreWriter, records: &[&str], wait: Duration) -> Option<redis::Cmd> {
    let settled = store.settle(records);
    // An error means the writer stopped (logged there): nothing queued
    // can land any more, so nothing can overtake.
    if tokio::time::timeout(wait, settled).await.is_ok() {
        let mut hdel = redis::cmd("HDEL");
        hdel.arg(store.pending_key()).arg(records);
        return Some(hdel);
    }
    store.drop_many(records);
    tracing::warn!(
        run = %records.first().copied().unwrap_or_default(),
        records = records.len(),
        wait_ms = wait.as_millis(),
        "pending record removal: no reply from Redis within the step's timeout, outcome \
         unknown; running the step anyway (should the removal not land, a crash or \
         restart runs the step again)"
    );
    None
}

/// Sends the commands of `batch` in one write, after `removal` when
/// there is one, all in one transaction (`MULTI` ... `EXEC`), waiting at most `timeout` for the
/// replies; one outcome per action, in order. A definite failure of the
/// whole (`is_definite_failure`: the transaction discarded, a connection
/// that cannot be opened) performed nothing: [`Outcome::NotPerformed`].
/// An error reply to one command fails that action; with the outcome unknown (no reply in time, a
/// connection broken while the replies were awaited) Redis may still
/// perform the commands, so the runs go on and one line says so. A
/// connection the server had closed (an idle timeout) is replaced before
/// the transaction goes out ([`Direct`]), so it reaches Redis once
/// (docs/service.md#actions). The derived events queued in `publications`
/// go in the same write, after the batch's commands, their replies judged
/// there ([`Publications::judge`]).
pub async fn send(
    con: Option<&mut Direct>,
    batch: &[Job],
    timeout: Duration,
    removal: Option<&redis::Cmd>,
    publications: Option<&mut Publications>,
) -> Vec<Outcome> {
    let commands: Vec<Option<LaneCommand<'_>>> = batch
        .iter()
        .map(|job| LaneCommand::of(job.performed()))
        .collect();
    let Some(con) = con else {
        let error = "no redis connection for the redis action".to_string();
        return vec![Outcome::NotPerformed(error); batch.len()];
    };
    // The pushes, and the derived events that go with them (two of a few
    // hundred bytes each, for a notification), in the connection's buffer.
    let mut bytes = con.take_buffer();
    let mut count = 0;
    if let Some(hdel) = removal {
        crate::resp::push_args(&mut bytes, &[b"MULTI"]);
        hdel.write_packed_command(&mut bytes);
        count += 2;
    }
    for command in commands.iter().flatten() {
        command.push(&mut bytes);
        count += 1;
    }
    if removal.is_some() {
        crate::resp::push_args(&mut bytes, &[b"EXEC"]);
        count += 1;
    }
    let mut publishing = publications.map(|queued| {
        let taken = queued.take(None, &mut bytes);
        (queued, taken)
    });
    let published = publishing.as_ref().map_or(0, |(_, taken)| taken.commands());
    let sent = con
        .send_within(&bytes, count + published, Some(timeout))
        .await;
    con.keep_buffer(bytes);
    let replies = match sent {
        Ok(mut replies) => {
            // The events' replies judged where they are, then cut off.
            let ours = count.min(replies.len());
            if let Some((queued, taken)) = publishing.as_mut() {
                queued.judge(taken, Ok(&replies[ours..]));
            }
            replies.truncate(ours);
            replies
        }
        Err(e) => {
            if let Some((queued, taken)) = publishing.as_mut() {
                queued.judge(taken, Err(&e));
            }
            return failed(batch, &commands, timeout, &e);
        }
    };
    let mut replies = match removal {
        None => replies.into_iter(),
        Some(_) => match transaction(replies) {
            Ok(replies) => replies.into_iter(),
            Err(why) => return vec![Outcome::NotPerformed(why); batch.len()],
        },
    };
    if removal.is_some() {
        // The removal's reply; a removal Redis refused is logged here (the
        // records stay, and their steps run again at the next start).
        if let Some(Err(e)) = replies.next() {
            tracing::error!(
                records = batch.len(),
                "pending records not removed ({}): their steps will run again at the next start",
                describe(&e)
            );
        }
    }
    commands
        .iter()
        .map(|command| {
            let command = command.as_ref().ok_or_else(|| failure(None, None))?;
            match replies.next() {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(failure(Some(command), Some(&e))),
                None => Err(format!("{} {}: no reply", command.name, command.key)),
            }
        })
        .map(Outcome::Finished)
        .collect()
}

/// The outcome of every action of `batch` when its write or its replies
/// failed whole: not performed when that is certain, else unknown (one line).
fn failed(
    batch: &[Job],
    commands: &[Option<LaneCommand<'_>>],
    timeout: Duration,
    e: &redis::RedisError,
) -> Vec<Outcome> {
    if is_definite_failure(e) {
        return vec![Outcome::NotPerformed(describe(e)); batch.len()];
    }
    let why = if e.is_timeout() {
        format!("no reply within {}ms", timeout.as_millis())
    } else {
        describe(e)
    };
    unknown(batch, commands, &why);
    vec![Outcome::Finished(Ok(())); batch.len()]
}

/// Publishes `events` and whatever else `queued` holds, with no action to
/// go with them, waiting for the replies as long as the connection does
/// (30 s).
pub async fn publish(con: Option<&mut Direct>, queued: &mut Publications, events: Vec<Event>) {
    let mut bytes = Vec::new();
    let taken = queued.take(Some(events), &mut bytes);
    if taken.commands() == 0 {
        return;
    }
    let Some(con) = con else {
        let e = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::NotConnected));
        queued.judge(&taken, Err(&e));
        return;
    };
    match con.send(&bytes, taken.commands()).await {
        Ok(replies) => queued.judge(&taken, Ok(&replies)),
        Err(e) => queued.judge(&taken, Err(&e)),
    }
}

/// At stop: the derived events still queued go out, waited for at most
/// `STOP_FLUSH` (3 s).
pub async fn publish_at_stop(con: Option<&mut Direct>, queued: &mut Publications) {
    let mut bytes = Vec::new();
    let taken = queued.take(None, &mut bytes);
    if taken.commands() == 0 {
        return;
    }
    let sent = match con {
        Some(con) => {
            con.send_within(&bytes, taken.commands(), Some(STOP_FLUSH))
                .await
        }
        None => Err(std::io::Error::from(std::io::ErrorKind::NotConnected).into()),
    };
    match sent {
        Ok(replies) => queued.judge(&taken, Ok(&replies)),
        Err(e) => {
            tracing::warn!(
                error = %describe(&e),
                "derived events still unpublished at stop were dropped (Redis slow or gone)"
            );
        }
    }
}

/// The replies of a transaction's commands (`MULTI`, each `QUEUED`, then
/// `EXEC`'s array): each command's reply, or why Redis refused the whole
/// (`EXECABORT (OOM command not allowed ...)`, with the first command's own
/// error when it said one: one line, however many commands the batch held).
fn transaction(
    replies: Vec<redis::RedisResult<redis::Value>>,
) -> Result<Vec<redis::RedisResult<redis::Value>>, String> {
    let mut replies = replies.into_iter();
    if let Some(Err(e)) = replies.next() {
        return Err(describe(&e));
    }
    let mut first = None;
    let mut exec = None;
    for reply in replies {
        if let (Err(e), None) = (&reply, &first) {
            first = Some(describe(e));
        }
        exec = Some(reply);
    }
    match exec {
        Some(Ok(redis::Value::Array(values))) => Ok(values
            .into_iter()
            .map(|value| match value {
                redis::Value::ServerError(e) => Err(e.into()),
                value => Ok(value),
            })
            .collect()),
        Some(Err(e)) => {
            let head = describe(&e);
            Err(match first {
                Some(first) if head.starts_with("EXECABORT") && first != head => {
                    format!("{head} ({first})")
                }
                _ => head,
            })
        }
        _ => Err("the transaction had no reply".to_string()),
    }
}

/// An action's error message: `LPUSH list: WRONGTYPE ...`.
fn failure(command: Option<&LaneCommand<'_>>, error: Option<&redis::RedisError>) -> String {
    match (command, error) {
        (Some(command), Some(error)) => {
            format!("{} {}: {}", command.name, command.key, describe(error))
        }
        (Some(command), None) => format!("{} {}: failed", command.name, command.key),
        // The pool hands the lane only actions it performs.
        (None, _) => "not an action the redis lane performs".to_string(),
    }
}

/// One line for a batch whose outcome is unknown, naming its first action.
fn unknown(batch: &[Job], commands: &[Option<LaneCommand<'_>>], why: &str) {
    let (Some(job), Some(Some(command))) = (batch.first(), commands.first()) else {
        return;
    };
    tracing::warn!(
        rule = %job.rule, step = job.step, run = %job.run, key = command.key,
        actions = batch.len(),
        "{} outcome unknown ({why}): Redis may still perform it; the run goes on",
        command.name
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruled_engine::pool::Lane;

    #[test]
    fn commands_encode_as_their_arguments_would() {
        for action in [
            Action::redis("list", "x"),
            Action::Publish {
                channel: "chan".into(),
                message: rulecore::template::Text::Plain("hello".into()),
                timeout_ns: 1,
            },
        ] {
            let command = LaneCommand::of(&action).unwrap();
            let mut bytes = Vec::new();
            command.push(&mut bytes);
            let mut want = Vec::new();
            crate::resp::push_args(
                &mut want,
                &[
                    command.name.as_bytes(),
                    command.key.as_bytes(),
                    command.value.as_bytes(),
                ],
            );
            assert_eq!(bytes, want);
        }
    }

    /// The pool routes by the engine's [`Lane::of`]; the lane performs
    /// what [`LaneCommand::of`] knows: the two agree on every kind.
    #[test]
    fn the_lane_performs_exactly_the_actions_routed_to_it() {
        let actions = [
            Action::redis("list", "x"),
            Action::Exec {
                command: "/bin/true".into(),
                timeout_ns: 1,
            },
            Action::Can(rulecore::bundle::CanFrame {
                iface: "can0".into(),
                id: 1,
                extended: false,
                rtr: false,
                dlc: 0,
                data: vec![],
            }),
        ];
        for action in &actions {
            assert_eq!(
                Lane::of(action) == Lane::Redis,
                LaneCommand::of(action).is_some(),
                "{action:?}"
            );
        }
    }
}
