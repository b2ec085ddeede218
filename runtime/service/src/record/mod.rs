//! `ruled record` (docs/recording.md): the real bus written down as a
//! timeline (docs/simulation.md) that `rulec simulate` and `rulec test`
//! read unchanged. What is watched is what a `ruled` running the bundle
//! with `--sources all` watches ([`Engine::live_pairs`],
//! [`Engine::watched_hashes`], [`Engine::input_channels`],
//! [`Engine::polls`]); what a notification asks to read is
//! [`Engine::notified`]'s answer. It only reads: no key of its own, no
//! `PUBLISH`, nothing a running `ruled` would see.

pub mod stream;
pub mod timeline;

use crate::bundle::{self, LoadError};
use crate::bus::read_pairs;
use crate::connection::{self, connect_manager};
use crate::driver::{open_client, Secret, ServiceError};
use crate::subscriptions::{Bus, Subscriber, Subscriptions};
use redis::aio::ConnectionManager;
use ruled_engine::{BusMode, Engine, EngineConfig, Expiry, Notified, SourceSet};
use std::collections::BTreeSet;
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use timeline::{State, Writer};
use tokio::time::Instant;

/// Deliveries of the subscription waiting for the recorder (it reads
/// each notified field before taking the next).
const HEARD_QUEUE: usize = 1024;

/// What `ruled record` records, from where, for how long.
#[derive(Debug)]
pub struct RecordConfig {
    pub bundle: PathBuf,
    pub redis_url: String,
    pub redis_password: Option<Secret>,
    pub redis_ca_file: Option<PathBuf>,
    /// Stop after this long; `None`: at SIGINT/SIGTERM.
    pub seconds: Option<u64>,
    /// Record stream `events` as `[[event]]` entries instead.
    pub events: bool,
    /// The timeline file; `None`: stdout.
    pub out: Option<PathBuf>,
    /// The recording's bound ([`timeline::MAX_RECORDING_BYTES`]).
    pub limit: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Bundle(#[from] LoadError),
    #[error(transparent)]
    Connect(#[from] ServiceError),
    #[error("reading {what} from redis: {source}")]
    Redis {
        what: String,
        source: redis::RedisError,
    },
    #[error("writing the recording: {0}")]
    Write(#[from] std::io::Error),
}

/// What was recorded.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub entries: usize,
    pub full: bool,
}

fn redis_error(what: impl Into<String>) -> impl FnOnce(redis::RedisError) -> RecordError {
    let what = what.into();
    move |source| RecordError::Redis { what, source }
}

/// Records until `stop` (SIGINT/SIGTERM), `--seconds` or the bound.
pub async fn run(
    config: RecordConfig,
    stop: impl Future<Output = ()>,
) -> Result<Summary, RecordError> {
    let loaded = bundle::load(&config.bundle)?;
    let payload = Arc::new(loaded.payload);
    let engine = Engine::new(
        Arc::clone(&payload),
        EngineConfig {
            traces: 0,
            bus: BusMode::Own,
            sources: SourceSet::All,
            ..EngineConfig::default()
        },
    );
    let (client, tls) = open_client(
        &config.redis_url,
        config.redis_password.as_ref(),
        config.redis_ca_file.as_deref(),
    )?;
    tokio::pin!(stop);
    // Redis not there yet: retried until it is, or until stopped.
    let con = tokio::select! {
        con = connect_manager(&client) => con,
        () = &mut stop => return Ok(Summary::default()),
    };
    let out: Box<dyn Write> = match &config.out {
        Some(path) => Box::new(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let mut writer = Writer::new(out, config.limit);
    writer.comment(&header(&config, &engine, &loaded.id))?;
    let deadline = config
        .seconds
        .map(|seconds| Instant::now() + Duration::from_secs(seconds));
    let stop = async move {
        match deadline {
            Some(at) => {
                tokio::select! {
                    () = &mut stop => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => (&mut stop).await,
        }
    };
    let input_channels = engine.input_channels().into_iter().collect();
    let mut recorder = Recorder {
        input_channels,
        engine,
        con,
        writer,
        shadow: Vec::new(),
        started: Instant::now(),
        floor_ms: 0,
        entries: 0,
    };
    if config.events {
        stream::record(&mut recorder, stop).await?;
    } else {
        let channels: BTreeSet<String> = recorder
            .engine
            .watched_hashes()
            .into_iter()
            .map(str::to_string)
            .chain(recorder.input_channels.iter().cloned())
            .collect();
        let subs = Subscriptions::compute(&payload, |_| false, channels);
        let mut subscriber = Subscriber::new(client, tls, subs);
        subscriber.open().await;
        // The subscriber's own task: `Subscriber::next` must not be
        // cancelled mid-message, and the loop below waits on polls too.
        let (heard_tx, heard) = tokio::sync::mpsc::channel(HEARD_QUEUE);
        let reader = tokio::spawn(async move {
            loop {
                let bus = subscriber.next().await;
                if heard_tx.send(bus).await.is_err() {
                    return;
                }
            }
        });
        recorder.seed().await?;
        let listened = recorder.listen(heard, stop).await;
        reader.abort();
        listened?;
    }
    recorder.writer.flush()?;
    Ok(Summary {
        entries: recorder.entries,
        full: recorder.writer.is_full(),
    })
}

/// The file's first lines: date, profile and digest, Redis address.
fn header(config: &RecordConfig, engine: &Engine, bundle_id: &str) -> String {
    let profile = match engine.profile() {
        Some((name, digest)) => format!("{name} {digest}"),
        None => "none".to_string(),
    };
    format!(
        "ruled record{}: {}\nprofile: {profile}\nbundle: {} ({bundle_id})\nredis: {}\n\
         replay: rulec simulate RULES_DIR --timeline THIS_FILE",
        if config.events { " --events" } else { "" },
        ruled_engine::utc(crate::clock::wall_ms()),
        config.bundle.display(),
        connection::redact_url(&config.redis_url),
    )
}

/// The recorder's state: the engine only answers what is watched and what
/// a notification reads; it is never handed a value.
pub(crate) struct Recorder {
    engine: Engine,
    con: ConnectionManager,
    writer: Writer<Box<dyn Write>>,
    /// The last value written of each watched pair (index into
    /// [`Engine::watched_pairs`]): read fields are written when they moved.
    shadow: Vec<Option<String>>,
    started: Instant,
    /// The earliest `at` of the next entry: one past a `[[message]]`, whose
    /// millisecond the simulator gives to `[[state]]` entries first.
    floor_ms: u64,
    /// [`Engine::input_channels`], asked once.
    input_channels: BTreeSet<String>,
    entries: usize,
}

impl Recorder {
    fn at_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        elapsed.max(self.floor_ms)
    }

    /// Writes one entry; `false` once the bound is reached.
    fn write(&mut self, text: &str) -> Result<bool, RecordError> {
        let written = self.writer.entry(text)?;
        self.entries += usize::from(written);
        Ok(written)
    }

    /// Reads `indices` within the field bound.
    async fn read(
        &mut self,
        indices: &[usize],
    ) -> Result<Vec<(usize, Option<String>)>, RecordError> {
        let pairs = self.engine.watched_pairs().to_vec();
        read_pairs(&mut self.con, &pairs, indices)
            .await
            .map_err(redis_error("watched fields"))
    }

    fn pair(&self, index: usize) -> (String, String) {
        let pair = &self.engine.watched_pairs()[index];
        (pair.hash.clone(), pair.field.clone())
    }

    /// The live pairs' values as `[[state]]` entries at `0s` with
    /// `before-start = true`, one per hash, and an `every` source's hash
    /// with its expiry.
    async fn seed(&mut self) -> Result<(), RecordError> {
        // The fields only guards read too: the simulator's guards judge
        // the timeline's values (docs/safety.md#decisions).
        let mut live = self.engine.live_pairs();
        live.extend(self.engine.guard_only_pairs());
        live.sort_unstable();
        live.dedup();
        self.shadow = vec![None; self.engine.watched_pairs().len()];
        let values = self.read(&live).await?;
        let mut by_hash: std::collections::BTreeMap<String, State> = Default::default();
        for (index, value) in values {
            let Some(value) = value else { continue };
            let (hash, field) = self.pair(index);
            let entry = by_hash.entry(hash.clone()).or_insert_with(|| State {
                hash,
                before_start: true,
                ..State::default()
            });
            entry.fields.insert(field, value.clone());
            self.shadow[index] = Some(value);
        }
        let expiring: Vec<String> = self
            .engine
            .expiry_hashes()
            .into_iter()
            .map(str::to_string)
            .collect();
        for hash in expiring {
            if let Some(entry) = by_hash.get_mut(&hash) {
                entry.expire_ms = self.expires_in(&hash).await?;
            }
        }
        for entry in by_hash.values() {
            if !self.write(&entry.render())? {
                break;
            }
        }
        Ok(())
    }

    /// How long until `hash` expires (`None`: it does not, or the server
    /// cannot say).
    async fn expires_in(&mut self, hash: &str) -> Result<Option<u64>, RecordError> {
        let expiry = crate::bounded_read::expiry(&mut self.con, hash)
            .await
            .map_err(redis_error(format!("the expiry of `{hash}`")))?;
        Ok(match expiry {
            Expiry::At(at) => u64::try_from(at - crate::clock::wall_ms()).ok(),
            _ => None,
        })
    }

    /// Notifications and polls until `stop` or the bound.
    async fn listen(
        &mut self,
        mut heard: tokio::sync::mpsc::Receiver<Bus>,
        stop: impl Future<Output = ()>,
    ) -> Result<(), RecordError> {
        let polls: Vec<(Vec<usize>, Duration)> = self
            .engine
            .polls()
            .into_iter()
            .map(|poll| {
                (
                    poll.pairs.clone(),
                    Duration::from_nanos(poll.every_ns.max(1_000_000)),
                )
            })
            .collect();
        let mut next_poll: Vec<Instant> = polls
            .iter()
            .map(|(_, every)| self.started + *every)
            .collect();
        tokio::pin!(stop);
        while !self.writer.is_full() {
            let due = next_poll
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|(_, at)| *at);
            let poll_at =
                due.map_or_else(|| Instant::now() + Duration::from_secs(3600), |(_, at)| at);
            tokio::select! {
                () = &mut stop => break,
                bus = heard.recv() => match bus {
                    Some(bus) => self.heard(bus).await?,
                    None => break,
                },
                () = tokio::time::sleep_until(poll_at) => {
                    if let Some((which, _)) = due {
                        next_poll[which] += polls[which].1;
                        let pairs = polls[which].0.clone();
                        self.polled(&pairs).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// One delivery of the subscription.
    async fn heard(&mut self, bus: Bus) -> Result<(), RecordError> {
        let message = match bus {
            Bus::Message(message) => message,
            Bus::Oversized { channel, bytes } => {
                let note = format!(
                    "{}ms: a message of {bytes} bytes on `{channel}` was skipped (over 64 KiB)",
                    self.at_ms()
                );
                self.writer.comment(&note)?;
                return Ok(());
            }
            Bus::Restored => {
                let note = format!("{}ms: the subscription was lost and restored: what was published in between is missing", self.at_ms());
                self.writer.comment(&note)?;
                return self.restored().await;
            }
        };
        let at_ms = self.at_ms();
        let channel = message.get_channel_name().to_string();
        let payload = message.get_payload_bytes();
        let notified = match std::str::from_utf8(payload) {
            Ok(name) => self.engine.notified(&channel, name),
            Err(_) => Notified::Ignore,
        };
        match notified {
            Notified::Read(pairs) => self.notified(at_ms, &pairs, false).await?,
            Notified::ReadWritten(pairs) => self.notified(at_ms, &pairs, true).await?,
            Notified::Reread(pairs) => self.reread(at_ms, &channel, &pairs).await?,
            Notified::Ignore => {}
        }
        if self.input_channels.contains(&channel) {
            match std::str::from_utf8(payload) {
                Ok(text) => {
                    self.write(&timeline::message(at_ms, &channel, text))?;
                    self.floor_ms = at_ms.saturating_add(1);
                }
                Err(_) => {
                    let note = format!(
                        "{at_ms}ms: a message on `{channel}` that is not UTF-8 was skipped"
                    );
                    self.writer.comment(&note)?;
                }
            }
        }
        Ok(())
    }

    /// `PUBLISH <hash> <field>`: the read fields that moved written first
    /// without a notification, then the notified field with it.
    async fn notified(
        &mut self,
        at_ms: u64,
        pairs: &[usize],
        expiring: bool,
    ) -> Result<(), RecordError> {
        let values = self.read(pairs).await?;
        let Some(((first, first_value), rest)) = values.split_first() else {
            return Ok(());
        };
        let moved: Vec<(usize, Option<String>)> = rest
            .iter()
            .filter(|(index, value)| self.shadow.get(*index) != Some(value))
            .cloned()
            .collect();
        self.silent_writes(at_ms, &moved)?;
        let (hash, field) = self.pair(*first);
        let expire_ms = if expiring {
            self.expires_in(&hash).await?
        } else {
            None
        };
        let entry = State {
            at_ms,
            hash,
            field: Some((field, first_value.clone())),
            expire_ms,
            ..State::default()
        };
        self.shadow[*first] = first_value.clone();
        self.write(&entry.render())?;
        Ok(())
    }

    /// `replaced` or `cleared`: the hash as it is now, rewritten (or
    /// cleared when nothing watched is left).
    async fn reread(&mut self, at_ms: u64, hash: &str, pairs: &[usize]) -> Result<(), RecordError> {
        let values = self.read(pairs).await?;
        let mut entry = State {
            at_ms,
            hash: hash.to_string(),
            ..State::default()
        };
        for (index, value) in &values {
            if let Some(value) = value {
                entry.fields.insert(self.pair(*index).1, value.clone());
            }
            self.shadow[*index] = value.clone();
        }
        if entry.fields.is_empty() {
            entry.clear = true;
        } else {
            entry.replace = true;
        }
        self.write(&entry.render())?;
        Ok(())
    }

    /// After a reconnect `ruled` reads every watched field again and each
    /// real change emits: a hash whose watched fields moved is written as
    /// it is now (`replace`), which the simulator rereads the same way.
    async fn restored(&mut self) -> Result<(), RecordError> {
        let at_ms = self.at_ms();
        let live = self.engine.live_pairs();
        let hashes: BTreeSet<String> = self
            .engine
            .watched_hashes()
            .into_iter()
            .map(str::to_string)
            .collect();
        for hash in hashes {
            let pairs: Vec<usize> = live
                .iter()
                .copied()
                .filter(|&index| self.engine.watched_pairs()[index].hash == hash)
                .collect();
            let values = self.read(&pairs).await?;
            if values
                .iter()
                .any(|(index, value)| self.shadow.get(*index) != Some(value))
            {
                self.reread(at_ms, &hash, &pairs).await?;
            }
        }
        Ok(())
    }

    /// A poll: each field that moved, written without a notification (the
    /// simulator polls it on the same interval).
    async fn polled(&mut self, pairs: &[usize]) -> Result<(), RecordError> {
        let at_ms = self.at_ms();
        let values = self.read(pairs).await?;
        let moved: Vec<(usize, Option<String>)> = values
            .into_iter()
            .filter(|(index, value)| self.shadow.get(*index) != Some(value))
            .collect();
        self.silent_writes(at_ms, &moved)
    }

    /// Values written without a notification: present ones in one entry
    /// per hash, each absent one as its own deletion.
    fn silent_writes(
        &mut self,
        at_ms: u64,
        moved: &[(usize, Option<String>)],
    ) -> Result<(), RecordError> {
        let mut by_hash: std::collections::BTreeMap<String, State> = Default::default();
        let mut deleted = Vec::new();
        for (index, value) in moved {
            let (hash, field) = self.pair(*index);
            self.shadow[*index] = value.clone();
            match value {
                Some(value) => {
                    let entry = by_hash.entry(hash.clone()).or_insert_with(|| State {
                        at_ms,
                        hash,
                        silent: true,
                        ..State::default()
                    });
                    entry.fields.insert(field, value.clone());
                }
                None => deleted.push(State {
                    at_ms,
                    hash,
                    field: Some((field, None)),
                    silent: true,
                    ..State::default()
                }),
            }
        }
        for entry in by_hash.values().chain(&deleted) {
            if !self.write(&entry.render())? {
                break;
            }
        }
        Ok(())
    }
}
