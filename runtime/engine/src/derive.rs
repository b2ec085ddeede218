//! The bus derivation (docs/sources.md): the one definition of what a
//! datastore change emits under the bundle's profile. Pure: a change in
//! (a field's previous and new value, or a channel message), events out.
//! Which sources are live (`--sources all|used`, `--bus own|follow`),
//! which hashes, channels and polls the service must watch, and which
//! topics the bus must not give us (owned) are decided here too; the
//! engine (`lib.rs`) keeps the values and dispatches what comes out.

use rulecore::bundle::{Payload, StatePair};
use rulecore::bytecode::Const;
use rulecore::event::Event;
use rulecore::event_data::DataValue;
use rulecore::profile::{Changes, DataSpec, Emit, Origin, Profile, Source};
use rulecore::value_pattern::any_matches;
use rulecore::vm::{self, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How `ruled` stands to the bus (docs/service.md#the-bus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BusMode {
    /// `ruled` derives the events, dispatches them to its rules and
    /// publishes them; derived topics are owned.
    #[default]
    Own,
    /// Another adapter (the Go event-service) publishes the bus: nothing
    /// is derived, sources only feed `state()` where a rule reads them.
    Follow,
}

/// Which sources are watched (docs/sources.md#choosing-a-profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceSet {
    /// Every source of the profile, as event-service does.
    #[default]
    All,
    /// Only sources whose topics a live rule's `on`/`cancel-on` can match
    /// or whose fields a rule's `state()` reads.
    Used,
}

/// Why a watched field was read (docs/sources.md#changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCause {
    /// After `PUBLISH <hash> <field>`: the first value read is the
    /// notified field, the rest its source's `read` fields.
    Notified,
    /// After `replaced`, a poll, or a reconnect: each real change emits.
    Reread,
}

/// What the service does with a notification on a watched hash's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notified {
    /// Nothing to read: not a watched field, or a polled one.
    Ignore,
    /// `HMGET` these pairs (the notified one first) and hand the values
    /// to [`crate::Engine::fields_read`] with [`ReadCause::Notified`].
    Read(Vec<usize>),
    /// The field of an `every` source: `HMGET` these pairs (the notified
    /// one first) and read the hash's expiry with them, then hand both to
    /// [`crate::Engine::written_read`], which counts the notification only
    /// when the hash was written anew (docs/sources.md#changes).
    ReadWritten(Vec<usize>),
    /// `replaced` or `cleared`: `HMGET` these pairs, then
    /// [`ReadCause::Reread`]. The values are checked, not the announcement:
    /// a field still there keeps its value, one gone becomes absent.
    Reread(Vec<usize>),
}

/// A hash's expiry as read with an `every` source's field (`PEXPIRETIME`):
/// a new write of the hash (keycard-service's tap) moves it later, a
/// replayed notification leaves it where it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No such key.
    Absent,
    /// The key has no expiry: a new write cannot be told from a replay.
    Persistent,
    /// Expires at this time (Unix ms; the simulator's virtual time).
    At(i64),
    /// Redis could not say (a server without `PEXPIRETIME`): every
    /// notification counts, as before.
    Unknown,
}

/// Whether a notification read with `now` means the hash was written anew
/// since the read that saw `before` (`None`: not known, no read or seeding
/// saw the hash since the bundle was loaded): it
/// was absent, or its expiry moved later, or it lost its expiry (`HSET`
/// keeps a key's expiry: only a new key has none). A hash without expiry
/// before and now cannot prove it (docs/sources.md#changes).
pub fn written_anew(before: Option<Expiry>, now: Expiry) -> bool {
    match (before, now) {
        (_, Expiry::Absent | Expiry::Unknown) => true,
        (Some(Expiry::At(was)), Expiry::At(at)) => at > was,
        (Some(Expiry::At(_)), Expiry::Persistent) => true,
        (_, Expiry::Persistent) => false,
        (_, Expiry::At(_)) => true,
    }
}

/// A live poll: its pairs and interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollPlan {
    pub hash: String,
    /// Indices into the watched pairs.
    pub pairs: Vec<usize>,
    pub every_ns: u64,
}

/// The `cleared` and `replaced` payloads (docs/sources.md#changes).
pub const CLEARED: &str = "cleared";
pub const REPLACED: &str = "replaced";

/// One source as the engine runs it.
#[derive(Debug, Clone)]
struct Live {
    /// The watched pair of a field source, and of its `read` fields.
    pair: Option<usize>,
    reads: Vec<usize>,
    live: bool,
}

/// The derivation of one bundle.
#[derive(Debug, Clone, Default)]
pub(crate) struct Derive {
    /// The bundle, when it has a profile: its sources are read in place.
    payload: Option<Arc<Payload>>,
    mode: BusMode,
    set: SourceSet,
    sources: Vec<Live>,
    /// Watched pair -> the sources on it, in declaration order.
    by_pair: BTreeMap<usize, Vec<u32>>,
    /// Channel -> the sources on it.
    channels: BTreeMap<Box<str>, Vec<u32>>,
    /// Hashes a source watches: `cleared` and `replaced` apply to them.
    hashes: BTreeMap<Box<str>, Vec<usize>>,
    /// Watched pairs polled (their notifications are not read).
    polled: Vec<usize>,
    /// Owned topics, sorted (empty in `follow` mode).
    owned: Vec<Box<str>>,
    /// Owned families: the first segment of every owned topic (`alarm` of
    /// `alarm.armed`), sorted and distinct.
    families: Vec<Box<str>>,
}

impl Derive {
    /// The derivation of `payload`, whose watched pairs are `watched`
    /// (every field a source names must be among them: see
    /// [`profile_pairs`]).
    pub(crate) fn new(
        payload: &Arc<Payload>,
        watched: &[StatePair],
        mode: BusMode,
        set: SourceSet,
    ) -> Derive {
        let Some(profile) = &payload.profile else {
            return Derive {
                mode,
                set,
                ..Derive::default()
            };
        };
        let index = |hash: &str, field: &str| {
            watched
                .iter()
                .position(|pair| pair.hash == hash && pair.field == field)
        };
        let mut derive = Derive {
            payload: Some(Arc::clone(payload)),
            mode,
            set,
            ..Derive::default()
        };
        for source in &profile.sources {
            let live = match &source.origin {
                Origin::Field { hash, field, read } => Live {
                    pair: index(hash, field),
                    reads: read.iter().filter_map(|f| index(hash, f)).collect(),
                    live: false,
                },
                Origin::Channel { .. } => Live {
                    pair: None,
                    reads: Vec::new(),
                    live: false,
                },
            };
            derive.sources.push(live);
        }
        for poll in &profile.polls {
            derive
                .polled
                .extend(poll.fields.iter().filter_map(|f| index(&poll.hash, f)));
        }
        if mode == BusMode::Own {
            derive.owned = profile.topics().into_iter().map(Box::from).collect();
            derive.families = families(&derive.owned);
        }
        derive
    }

    /// Decides which sources are live for these rules (`live_rule(i)`:
    /// rule `i` is on) and rebuilds the lookups; called at load and when
    /// a rule is turned on or off.
    pub(crate) fn follow_rules(&mut self, payload: &Payload, live_rule: impl Fn(usize) -> bool) {
        let Some(bundle) = self.payload.clone() else {
            return;
        };
        let Some(profile) = &bundle.profile else {
            return;
        };
        self.by_pair.clear();
        self.channels.clear();
        self.hashes.clear();
        let read_pairs = state_reads(payload, &live_rule);
        for (at, source) in profile.sources.iter().enumerate() {
            let live = self.mode == BusMode::Own
                && match self.set {
                    SourceSet::All => true,
                    SourceSet::Used => {
                        emits_for_rules(source, payload, &live_rule)
                            || self.sources[at]
                                .pair
                                .is_some_and(|pair| read_pairs.contains(&pair))
                    }
                };
            self.sources[at].live = live;
            if !live {
                continue;
            }
            let at = u32::try_from(at).unwrap_or(u32::MAX);
            match &source.origin {
                Origin::Field { hash, .. } => {
                    let Some(pair) = self.sources[at as usize].pair else {
                        continue;
                    };
                    self.by_pair.entry(pair).or_default().push(at);
                    let pairs = self.hashes.entry(hash.as_str().into()).or_default();
                    let reads = &self.sources[at as usize].reads;
                    for pair in std::iter::once(pair).chain(reads.iter().copied()) {
                        if !pairs.contains(&pair) {
                            pairs.push(pair);
                        }
                    }
                }
                Origin::Channel { channel } => self
                    .channels
                    .entry(channel.as_str().into())
                    .or_default()
                    .push(at),
            }
        }
    }

    pub(crate) fn mode(&self) -> BusMode {
        self.mode
    }

    pub(crate) fn profile(&self) -> Option<&Profile> {
        self.payload.as_deref()?.profile.as_ref()
    }

    /// Whether `topic` is owned: derived here, or of the family of a
    /// topic derived here (`alarm.bogus`), so never taken from the bus.
    pub(crate) fn owns(&self, topic: &str) -> bool {
        let exact = || {
            self.owned
                .binary_search_by(|owned| (**owned).cmp(topic))
                .is_ok()
        };
        let family = || {
            topic.split_once('.').is_some_and(|(first, _)| {
                self.families
                    .binary_search_by(|owned| (**owned).cmp(first))
                    .is_ok()
            })
        };
        exact() || family()
    }

    pub(crate) fn owned(&self) -> impl Iterator<Item = &str> + '_ {
        self.owned.iter().map(|topic| &**topic)
    }

    /// The channels the live channel sources read, sorted.
    pub(crate) fn channels(&self) -> impl Iterator<Item = &str> + '_ {
        self.channels.keys().map(|channel| &**channel)
    }

    /// Whether pair `index` is a live source's field (or one it reads).
    pub(crate) fn watches(&self, index: usize) -> bool {
        self.hashes.values().any(|pairs| pairs.contains(&index))
    }

    /// What a notification `payload` on `hash`'s channel asks for;
    /// `index` finds a watched pair by (hash, field).
    pub(crate) fn notified(
        &self,
        hash: &str,
        payload: &str,
        index: impl Fn(&str, &str) -> Option<usize>,
    ) -> Notified {
        let derived = self.hashes.get(hash);
        match index(hash, payload) {
            Some(pair) if self.polled.contains(&pair) => Notified::Ignore,
            Some(pair) => {
                let mut pairs = vec![pair];
                for &source in self.by_pair.get(&pair).into_iter().flatten() {
                    for &read in &self.sources[source as usize].reads {
                        if !pairs.contains(&read) {
                            pairs.push(read);
                        }
                    }
                }
                if self.every(pair) {
                    Notified::ReadWritten(pairs)
                } else {
                    Notified::Read(pairs)
                }
            }
            None => match (derived, payload) {
                (Some(pairs), CLEARED | REPLACED) => Notified::Reread(pairs.clone()),
                _ => Notified::Ignore,
            },
        }
    }

    /// The hashes of the live `every` sources, sorted: their expiry is
    /// read at seeding too, so a replay right after a start is refused.
    pub(crate) fn every_hashes(&self) -> Vec<&str> {
        self.hashes
            .iter()
            .filter(|(_, pairs)| pairs.iter().any(|&pair| self.every(pair)))
            .map(|(hash, _)| &**hash)
            .collect()
    }

    /// Whether a live `every` source is on pair `pair`: its notifications
    /// are judged by the hash's expiry.
    fn every(&self, pair: usize) -> bool {
        let Some(profile) = self.profile() else {
            return false;
        };
        self.by_pair.get(&pair).into_iter().flatten().any(|&at| {
            profile
                .sources
                .get(at as usize)
                .is_some_and(|source| source.changes == Changes::Every)
        })
    }

    /// The polls a live rule needs: a poll of a field some rule's
    /// `state()` reads, or a live source's field.
    pub(crate) fn polls(
        &self,
        payload: &Payload,
        watched: &[StatePair],
        live_rule: impl Fn(usize) -> bool,
    ) -> Vec<PollPlan> {
        let Some(profile) = self.profile() else {
            return Vec::new();
        };
        let reads = state_reads(payload, live_rule);
        profile
            .polls
            .iter()
            .filter_map(|poll| {
                let pairs: Vec<usize> = poll
                    .fields
                    .iter()
                    .filter_map(|field| {
                        watched
                            .iter()
                            .position(|pair| pair.hash == poll.hash && pair.field == *field)
                    })
                    .collect();
                let needed = pairs
                    .iter()
                    .any(|pair| reads.contains(pair) || self.by_pair.contains_key(pair));
                needed.then(|| PollPlan {
                    hash: poll.hash.clone(),
                    pairs,
                    every_ns: poll.every_ns,
                })
            })
            .collect()
    }

    /// The events a change of pair `index` emits, in order
    /// (docs/sources.md#changes). `old`/`new` are `None` when the field
    /// was or is absent; `field_value(pair)` reads the shadow (for `read`
    /// fields, already updated by the same read).
    pub(crate) fn field_events(
        &self,
        change: FieldChange<'_>,
        consts: &[Const],
        state: &[String],
        field_value: impl Fn(usize) -> Option<String>,
    ) -> Vec<Event> {
        let (Some(profile), Some(sources)) = (self.profile(), self.by_pair.get(&change.pair))
        else {
            return Vec::new();
        };
        let Some(new) = change.new else {
            return Vec::new();
        };
        let mut events = Vec::new();
        for &at in sources {
            let Some(source) = profile.sources.get(at as usize) else {
                continue;
            };
            let every = source.changes == Changes::Every && change.cause == ReadCause::Notified;
            if !every && (change.old.is_none() || change.old == Some(new)) {
                continue;
            }
            let Origin::Field { hash, field, read } = &source.origin else {
                continue;
            };
            let reads: Vec<(&str, Option<String>)> = read
                .iter()
                .zip(&self.sources[at as usize].reads)
                .map(|(name, &pair)| (name.as_str(), field_value(pair)))
                .collect();
            let context = Context {
                from: change.old,
                to: Some(new),
                payload: None,
                place: [("hash", hash.as_str()), ("field", field.as_str())],
                reads: &reads,
            };
            for emit in &source.emits {
                let old = change.old.unwrap_or_default();
                let matched = (emit.from.is_empty() || change.old.is_some())
                    && any_matches(&emit.from, old)
                    && any_matches(&emit.to, new);
                if matched {
                    events.extend(context.emit(emit, consts, state));
                }
            }
        }
        events
    }

    /// The events one message on `channel` emits, in order.
    pub(crate) fn channel_events(
        &self,
        channel: &str,
        payload: &[u8],
        consts: &[Const],
        state: &[String],
    ) -> Vec<Event> {
        let (Some(profile), Some(sources)) = (self.profile(), self.channels.get(channel)) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(payload);
        let mut events = Vec::new();
        for &at in sources {
            let Some(source) = profile.sources.get(at as usize) else {
                continue;
            };
            let context = Context {
                from: None,
                to: None,
                payload: Some(&text),
                place: [("channel", channel), ("payload", &text)],
                reads: &[],
            };
            for emit in &source.emits {
                if any_matches(&emit.payload, &text) {
                    events.extend(context.emit(emit, consts, state));
                }
            }
        }
        events
    }
}

/// One read field's change, as [`Derive::field_events`] takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldChange<'a> {
    pub pair: usize,
    pub old: Option<&'a str>,
    pub new: Option<&'a str>,
    pub cause: ReadCause,
}

/// A change as an emit's conditions and values see it
/// (docs/sources.md#the-change-as-an-expression-sees-it).
struct Context<'a> {
    from: Option<&'a str>,
    to: Option<&'a str>,
    payload: Option<&'a str>,
    /// `hash`/`field`, or `channel`/`payload`.
    place: [(&'a str, &'a str); 2],
    reads: &'a [(&'a str, Option<String>)],
}

impl Context<'_> {
    /// The event `emit` makes of this change, if its `when` holds.
    fn emit(&self, emit: &Emit, consts: &[Const], state: &[String]) -> Option<Event> {
        let needs_context = emit.when.is_some()
            || emit
                .data
                .iter()
                .any(|(_, spec)| matches!(spec, DataSpec::Expr(_)));
        let seen = needs_context.then(|| self.as_event(&emit.topic));
        if let (Some(when), Some(seen)) = (&emit.when, &seen) {
            // A condition that fails to evaluate does not emit.
            if !vm::eval_bool(when, consts, seen, state).unwrap_or(false) {
                return None;
            }
        }
        let mut data = Vec::with_capacity(emit.data.len());
        for (key, spec) in &emit.data {
            let value = match spec {
                DataSpec::Str(text) => Some(DataValue::Str(text.as_str().into())),
                DataSpec::Int(n) => Some(DataValue::Int(*n)),
                DataSpec::Float(x) => Some(DataValue::Float(*x)),
                DataSpec::Bool(b) => Some(DataValue::Bool(*b)),
                DataSpec::From => self.from.map(|v| DataValue::Str(v.into())),
                DataSpec::To => self.to.map(|v| DataValue::Str(v.into())),
                DataSpec::Payload => self.payload.map(|v| DataValue::Str(v.into())),
                DataSpec::Field(name) => self
                    .reads
                    .iter()
                    .find(|(read, _)| read == name)
                    .and_then(|(_, value)| value.as_deref())
                    .map(|v| DataValue::Str(v.into())),
                DataSpec::Expr(program) => seen
                    .as_ref()
                    .and_then(|seen| vm::eval(program, consts, seen, state).ok())
                    .and_then(value_to_data),
            };
            if let Some(value) = value {
                data.push((key.as_str(), value));
            }
        }
        let from_to = emit.from_to;
        Some(Event {
            topic: emit.topic.as_str().into(),
            src: Some(Event::INPUT_SRC.into()),
            from: self.from.filter(|_| from_to).map(Into::into),
            to: self.to.filter(|_| from_to).map(Into::into),
            data: if data.is_empty() {
                DataValue::Null
            } else {
                DataValue::object(data)
            },
            ..Event::default()
        })
    }

    /// The change as an event, for `when` and `expr`.
    fn as_event(&self, topic: &str) -> Event {
        let mut data: Vec<(&str, DataValue)> = self
            .place
            .iter()
            .map(|(key, value)| (*key, DataValue::Str((*value).into())))
            .collect();
        for (name, value) in self.reads {
            if let Some(value) = value {
                data.push((name, DataValue::Str(value.as_str().into())));
            }
        }
        Event {
            topic: topic.into(),
            src: Some(Event::INPUT_SRC.into()),
            from: self.from.map(Into::into),
            to: self.to.map(Into::into),
            data: DataValue::object(data),
            ..Event::default()
        }
    }
}

fn value_to_data(value: Value<'_>) -> Option<DataValue> {
    Some(match value {
        Value::Str(text) => DataValue::Str(text.as_ref().into()),
        Value::Int(n) => DataValue::Int(n),
        Value::Float(x) => DataValue::Float(x),
        Value::Bool(b) => DataValue::Bool(b),
        Value::Empty => return None,
    })
}

/// The families of `owned`: each topic's first segment.
fn families(owned: &[Box<str>]) -> Vec<Box<str>> {
    let mut families: Vec<Box<str>> = owned
        .iter()
        .filter_map(|topic| topic.split_once('.'))
        .map(|(first, _)| first.into())
        .collect();
    families.sort_unstable();
    families.dedup();
    families
}

/// Whether a live rule's `on` or `cancel-on` can match a topic `source`
/// emits.
fn emits_for_rules(source: &Source, payload: &Payload, live_rule: &impl Fn(usize) -> bool) -> bool {
    payload
        .rules
        .iter()
        .enumerate()
        .filter(|(at, _)| live_rule(*at))
        .any(|(_, rule)| {
            source.emits.iter().any(|emit| {
                rule.on
                    .iter()
                    .chain(rule.cancel_on())
                    .any(|pattern| pattern.matches(&emit.topic))
            })
        })
}

/// The watched pairs live rules' `state()` reads: the bundle's state
/// pairs keep their indices among the watched ones.
fn state_reads(payload: &Payload, live_rule: impl Fn(usize) -> bool) -> Vec<usize> {
    use rulecore::bytecode::Op;
    let mut reads: Vec<usize> = payload
        .rules
        .iter()
        .enumerate()
        .filter(|(at, _)| live_rule(*at))
        .flat_map(|(_, rule)| {
            rule.when
                .iter()
                .map(|when| &**when)
                .chain(rule.steps.iter().filter_map(|step| step.when.as_ref()))
                .flat_map(|program| program.ops.iter())
                .filter_map(|op| match op {
                    Op::State(index) => usize::try_from(*index).ok(),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    reads.sort_unstable();
    reads.dedup();
    reads
}

/// Every (hash, field) the profile's sources and polls name: watched
/// beside the bundle's state pairs and the inputs' fields.
pub(crate) fn profile_pairs(payload: &Payload) -> Vec<StatePair> {
    let Some(profile) = &payload.profile else {
        return Vec::new();
    };
    let pair = |hash: &str, field: &str| StatePair {
        hash: hash.to_string(),
        field: field.to_string(),
    };
    let mut pairs = Vec::new();
    for source in &profile.sources {
        if let Origin::Field { hash, field, read } = &source.origin {
            pairs.push(pair(hash, field));
            pairs.extend(read.iter().map(|f| pair(hash, f)));
        }
    }
    for poll in &profile.polls {
        pairs.extend(poll.fields.iter().map(|f| pair(&poll.hash, f)));
    }
    pairs
}
