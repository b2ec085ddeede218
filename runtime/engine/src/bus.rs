//! The bus profile at run time (docs/sources.md): the engine's side of
//! what [`crate::derive`] defines. The values it reads are the state
//! shadow's; the events it derives are dispatched to the rules at once
//! and handed to the service to publish ([`Effect::Publish`]); polls are
//! timers like the runs' ([`Effect::Poll`]).

use crate::derive::{
    written_anew, BusMode, Derive, Expiry, FieldChange, Notified, PollPlan, ReadCause,
};
use crate::effect::Effect;
use crate::time::{Now, Time};
use crate::Engine;
use rulecore::bundle::Payload;
use rulecore::event::Event;
use rulecore::event_data::DataValue;
use rulecore::small_str::SmallStr;
use std::collections::BTreeMap;

/// The longest value an envelope on the bus carries, in bytes
/// (docs/service.md#the-bus): longer ones are cut, with [`CUT_MARKER`].
pub const BUS_VALUE_BYTES: usize = 1024;
/// What follows a value cut for the bus: `…[cut from <N> bytes]`, `N` the
/// whole value's length.
pub const CUT_MARKER: &str = "…[cut from ";

/// What the engine keeps for the profile.
#[derive(Debug, Default)]
pub(crate) struct BusState {
    pub(crate) derive: Derive,
    /// Per watched pair: whether the field holds a value (seeded, or read
    /// since); `false` is absent, which a first value is compared with.
    pub(crate) present: Vec<bool>,
    /// The live polls and when each is next due (`Time::ZERO`: at once).
    polls: Vec<(PollPlan, Time)>,
    /// The last event id given out: Unix ms and a sequence within it, as
    /// stream entry ids are.
    pub(crate) last_id: (i64, u64),
    /// Only a buffer for the next id's text ([`BusState::next_id`]).
    id_text: String,
    /// Per hash of an `every` source, its expiry at the last notification
    /// read (docs/sources.md#changes).
    expiries: BTreeMap<Box<str>, Expiry>,
    /// Pairs before this index (state pairs and inputs' fields) are
    /// always watched; the profile's after it only while live.
    always: usize,
    /// The state pairs only guards read (`guard::guard_only_pairs`): not
    /// watched for them, since a guard reads fresh at the action.
    guard_only: Vec<bool>,
}

impl BusState {
    pub(crate) fn new(
        payload: &std::sync::Arc<Payload>,
        engine: &crate::EngineConfig,
        inputs: &crate::input::Inputs,
    ) -> Self {
        let watched = inputs.watched();
        let mut derive = Derive::new(payload, watched, engine.bus, engine.sources);
        derive.follow_rules(payload, |rule| payload.rules[rule].enabled);
        let polls = derive
            .polls(payload, watched, |rule| payload.rules[rule].enabled)
            .into_iter()
            .map(|poll| (poll, Time::ZERO))
            .collect();
        BusState {
            derive,
            present: vec![false; watched.len()],
            polls,
            last_id: (0, 0),
            id_text: String::new(),
            expiries: BTreeMap::new(),
            always: inputs.own_pairs(),
            guard_only: crate::guard::guard_only_pairs(payload),
        }
    }

    /// Whether pair `index` is watched whatever the live sources: a state
    /// pair or an input's field, unless only guards read it.
    fn always_watched(&self, index: usize) -> bool {
        index < self.always && !self.guard_only.get(index).copied().unwrap_or(false)
    }

    /// The next event id at `wall_ms`: above every id given out before.
    /// Written in a kept buffer, not by `format!`: two ids a notification
    /// on the bus's path (docs/engine.md#cpu-per-notification).
    fn next_id(&mut self, wall_ms: i64) -> SmallStr {
        let (ms, seq) = self.last_id;
        self.last_id = if wall_ms > ms {
            (wall_ms, 0)
        } else {
            (ms, seq + 1)
        };
        crate::run_id::event_id(self.last_id.0, self.last_id.1, &mut self.id_text)
    }
}

impl Engine {
    /// `--bus own` or `follow` (docs/service.md#the-bus).
    pub fn bus_mode(&self) -> BusMode {
        self.bus.derive.mode()
    }

    /// The bundle's profile: its name and digest.
    pub fn profile(&self) -> Option<(&str, &str)> {
        self.bus
            .derive
            .profile()
            .map(|profile| (profile.name.as_str(), profile.digest.as_str()))
    }

    /// Whether an event on `ev:<topic>` must not reach a rule: an owned
    /// topic (derived here) or an `input.*` one (made only by its input),
    /// docs/sources.md#owned-topics.
    pub fn refuses_from_bus(&self, topic: &str) -> bool {
        topic.starts_with("input.") || self.bus.derive.owns(topic)
    }

    /// The owned topics, sorted (none in `follow` mode).
    pub fn owned_topics(&self) -> Vec<&str> {
        self.bus.derive.owned().collect()
    }

    /// The watched pairs the service seeds, re-reads and keeps current
    /// now: the bundle's state pairs and inputs' fields, then the live
    /// sources' fields and the live polls' (indices into
    /// [`Engine::watched_pairs`], ascending).
    pub fn live_pairs(&self) -> Vec<usize> {
        let polled = |index: usize| {
            self.bus
                .polls
                .iter()
                .any(|(poll, _)| poll.pairs.contains(&index))
        };
        (0..self.inputs.watched().len())
            .filter(|&index| {
                self.bus.always_watched(index) || self.bus.derive.watches(index) || polled(index)
            })
            .collect()
    }

    /// The state pairs only guards read (docs/safety.md#guards): not
    /// among [`Engine::live_pairs`], read fresh at the action; `ruled
    /// record` still seeds them, so a recorded timeline gives the
    /// simulator's guards the value they had at its start.
    pub fn guard_only_pairs(&self) -> Vec<usize> {
        let only = &self.bus.guard_only;
        (0..only.len()).filter(|&index| only[index]).collect()
    }

    /// The hashes whose channel must be subscribed: those of the live
    /// pairs, sorted and distinct, polled-only hashes left out.
    pub fn watched_hashes(&self) -> Vec<&str> {
        let watched = self.inputs.watched();
        let mut hashes: Vec<&str> = (0..watched.len())
            .filter(|&index| self.bus.always_watched(index) || self.bus.derive.watches(index))
            .map(|index| watched[index].hash.as_str())
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        hashes
    }

    /// The shadow's value of a watched pair (`""` while absent).
    pub fn state_value(&self, hash: &str, field: &str) -> Option<&str> {
        let index = self.inputs.index(hash, field)?;
        self.state.get(index).map(String::as_str)
    }

    /// The live polls.
    pub fn polls(&self) -> Vec<&PollPlan> {
        self.bus.polls.iter().map(|(poll, _)| poll).collect()
    }

    /// What to do with `PUBLISH <hash> <payload>` (docs/sources.md#changes).
    pub fn notified(&self, hash: &str, payload: &str) -> Notified {
        let live = self.live_pairs();
        match self
            .bus
            .derive
            .notified(hash, payload, |hash, field| self.inputs.index(hash, field))
        {
            Notified::Read(pairs) if !live.contains(&pairs[0]) => Notified::Ignore,
            other => other,
        }
    }

    /// Values read from the datastore (`None`: the field is absent).
    /// With [`ReadCause::Notified`] the first is the notified field and
    /// the rest are read with it (applied first, emitting nothing of
    /// their own); otherwise each is a change of its own. Every value
    /// feeds `state()` before anything derived from it is dispatched;
    /// inputs over a pair make their events as
    /// [`Engine::field_changed`] does.
    pub fn fields_read(&mut self, now: Now, cause: ReadCause, values: &[(usize, Option<String>)]) {
        let split = usize::from(cause == ReadCause::Notified && !values.is_empty());
        let (first, rest) = values.split_at(split);
        let mut derived = Vec::new();
        for (index, value) in rest {
            let own = if cause == ReadCause::Notified {
                None
            } else {
                Some(ReadCause::Reread)
            };
            self.field_read(now, *index, value.as_deref(), own, &mut derived);
        }
        for (index, value) in first {
            self.field_read(now, *index, value.as_deref(), Some(cause), &mut derived);
        }
        self.dispatch_derived(now, derived);
    }

    /// The hashes whose expiry seeding reads ([`Engine::expiry_seen`]):
    /// those of the live `every` sources (the keycard hash).
    pub fn expiry_hashes(&self) -> Vec<&str> {
        self.bus.derive.every_hashes()
    }

    /// Seeding: `hash`'s expiry as it is, the baseline the next
    /// notification's is compared with ([`Engine::written_read`]).
    pub fn expiry_seen(&mut self, hash: &str, expiry: Expiry) {
        self.bus.expiries.insert(hash.into(), expiry);
    }

    /// The values a [`Notified::ReadWritten`] asked for, with the hash's
    /// `expiry` read at the same time (docs/sources.md#changes). Written
    /// anew ([`written_anew`]): taken as [`ReadCause::Notified`], so an
    /// `every` source emits. Otherwise only a real change counts, as for a
    /// `distinct` source; a notification that changes nothing (a replayed
    /// `PUBLISH keycard authentication`) is not applied and returns
    /// `false`, for the service to count in `rejected`.
    pub fn written_read(
        &mut self,
        now: Now,
        expiry: Expiry,
        values: &[(usize, Option<String>)],
    ) -> bool {
        let Some(hash) = values
            .first()
            .and_then(|(index, _)| self.inputs.watched().get(*index))
            .map(|pair| Box::<str>::from(pair.hash.as_str()))
        else {
            return true;
        };
        let before = self.bus.expiries.insert(hash, expiry);
        if written_anew(before, expiry) {
            self.fields_read(now, ReadCause::Notified, values);
            return true;
        }
        let changes = values.iter().any(|(index, value)| {
            let present = self.bus.present.get(*index).copied().unwrap_or(false);
            let shadow = self.state.get(*index).map(String::as_str);
            match value {
                Some(value) => !present || shadow != Some(value.as_str()),
                None => present,
            }
        });
        if changes {
            self.fields_read(now, ReadCause::Reread, values);
        }
        changes
    }

    /// The newest entry id of stream `events` at start: ids given out
    /// from here on are above it.
    pub fn set_bus_floor(&mut self, ms: i64, seq: u64) {
        if (ms, seq) > self.bus.last_id {
            self.bus.last_id = (ms, seq);
        }
    }

    /// One pair's new value: stored, then its input events and (when
    /// `derive` is given) the events its live sources derive, collected
    /// in `derived`.
    fn field_read(
        &mut self,
        now: Now,
        index: usize,
        value: Option<&str>,
        derive: Option<ReadCause>,
        derived: &mut Vec<Event>,
    ) {
        let Some(slot) = self.state.get_mut(index) else {
            return;
        };
        let old = std::mem::replace(slot, value.unwrap_or_default().to_string());
        let was = std::mem::replace(&mut self.bus.present[index], value.is_some());
        self.hold_state_changed(index, Some(now));
        if let Some(cause) = derive {
            let change = FieldChange {
                pair: index,
                old: was.then_some(old.as_str()),
                new: value,
                cause,
            };
            let (state, present) = (&self.state, &self.bus.present);
            let events =
                self.bus
                    .derive
                    .field_events(change, &self.payload.consts, state, |pair| {
                        present
                            .get(pair)
                            .copied()
                            .unwrap_or(false)
                            .then(|| state[pair].clone())
                    });
            // The first pair's events are taken whole, not copied.
            if derived.is_empty() {
                *derived = events;
            } else {
                derived.extend(events);
            }
        }
        let events = self.inputs.hash_events(index, &old, &self.state[index]);
        for event in events {
            self.handle_event(now, event);
        }
    }

    /// The events a channel source derives from one message.
    pub(crate) fn channel_derived(&mut self, now: Now, channel: &str, payload: &[u8]) {
        let events =
            self.bus
                .derive
                .channel_events(channel, payload, &self.payload.consts, &self.state);
        self.dispatch_derived(now, events);
    }

    /// Gives each derived event its id and time, hands it to the rules
    /// whole, then to the service to publish with its values cut for the
    /// bus ([`for_bus`]), all of one change in one effect.
    fn dispatch_derived(&mut self, now: Now, mut events: Vec<Event>) {
        if events.is_empty() || self.stopped {
            return;
        }
        for event in &mut events {
            event.id = Some(self.bus.next_id(now.wall_ms));
            event.ts = Some(now.wall_ms);
        }
        let published = events.iter().map(for_bus).collect();
        for event in events {
            self.handle_event(now, event);
        }
        self.effects.push_back(Effect::Publish(published));
    }

    /// The live channel sources' channels, sorted.
    pub(crate) fn source_channels(&self) -> impl Iterator<Item = &str> + '_ {
        self.bus.derive.channels()
    }

    /// Rules turned on or off: the live sources and polls follow.
    pub(crate) fn bus_follow_rules(&mut self) {
        let payload = std::sync::Arc::clone(&self.payload);
        let states = &self.rules;
        self.bus
            .derive
            .follow_rules(&payload, |rule| states[rule].enabled);
        let polls = self
            .bus
            .derive
            .polls(&payload, self.inputs.watched(), |rule| states[rule].enabled);
        let old = std::mem::take(&mut self.bus.polls);
        self.bus.polls = polls
            .into_iter()
            .map(|poll| {
                let due = old
                    .iter()
                    .find(|(known, _)| *known == poll)
                    .map_or(Time::ZERO, |(_, due)| *due);
                (poll, due)
            })
            .collect();
    }

    /// When the next poll is due.
    pub(crate) fn poll_deadline(&self) -> Option<Time> {
        self.bus.polls.iter().map(|(_, due)| *due).min()
    }

    /// Asks for the polls due at `now` and schedules their next turn.
    pub(crate) fn polls_due(&mut self, now: Now) {
        for (poll, due) in &mut self.bus.polls {
            if *due <= now.time {
                *due = now.time.plus_nanos(poll.every_ns);
                self.effects.push_back(Effect::Poll {
                    hash: poll.hash.clone(),
                    pairs: poll.pairs.clone(),
                });
            }
        }
    }
}

/// `event` as the bus carries it (docs/service.md#the-bus): every string
/// value (`from`, `to`, those in `data`) over [`BUS_VALUE_BYTES`] cut, so
/// stream `events` (`MAXLEN ~ 2000`) is bounded in bytes too.
pub(crate) fn for_bus(event: &Event) -> Event {
    let mut out = event.clone();
    for value in [&mut out.from, &mut out.to].into_iter().flatten() {
        if let Some(cut) = cut(value) {
            *value = cut.as_str().into();
        }
    }
    if needs_cut(&out.data) {
        out.data = cut_data(&out.data);
    }
    out
}

/// `text` cut at [`BUS_VALUE_BYTES`] (a character boundary) with the
/// marker naming its whole length; `None` when it is short enough.
fn cut(text: &str) -> Option<String> {
    if text.len() <= BUS_VALUE_BYTES {
        return None;
    }
    let kept = rulecore::text::cut(text, BUS_VALUE_BYTES);
    Some(format!("{kept}{CUT_MARKER}{} bytes]", text.len()))
}

fn needs_cut(value: &DataValue) -> bool {
    match value {
        DataValue::Str(text) => text.len() > BUS_VALUE_BYTES,
        DataValue::Array(items) => items.iter().any(needs_cut),
        DataValue::Object(object) => object.iter().any(|(_, value)| needs_cut(value)),
        _ => false,
    }
}

fn cut_data(value: &DataValue) -> DataValue {
    match value {
        DataValue::Str(text) => {
            cut(text).map_or_else(|| value.clone(), |cut| DataValue::Str(cut.into()))
        }
        DataValue::Array(items) => DataValue::Array(items.iter().map(cut_data).collect()),
        DataValue::Object(object) => {
            DataValue::object(object.iter().map(|(key, value)| (key, cut_data(value))))
        }
        _ => value.clone(),
    }
}
